"""Writes the second, larger tool-search evaluation: eval/dev2.json and eval/test2.json.

Requests in Chinese and English against the 634-tool mixed catalog (fixtures/tools.json +
fixtures/mixed-tools.json: 96 tools described in Chinese, the rest in English), plus requests no
tool of the catalog serves. Written by hand from the tools' own descriptions, before any search
ran on them and before any tuning; none is a request of dev.json, test.json, mixed-dev.json or
mixed-test.json (checked below). Split 50/50 per (language, Chinese-described or not,
answerable) stratum with a fixed seed; the split is its own commit.

dev2 is what levers are chosen on; test2 is run once per change and never tuned to.

Usage: python3 crates/tool-search/scripts/write_eval2_queries.py
"""
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "fixtures")

GEO = ["amap:maps_geo", "baidu_map:map_geocode", "google_maps:maps_geocode"]
REGEO = ["amap:maps_regeocode", "baidu_map:map_reverse_geocode", "google_maps:maps_reverse_geocode"]
WEATHER = ["amap:maps_weather", "baidu_map:map_weather", "qweather:get_weather",
           "qweather:get_hourly_weather", "qweather:get_weather_now"]
NOW_WEATHER = ["qweather:get_weather_now", "amap:maps_weather", "baidu_map:map_weather"]
DRIVE = ["amap:maps_direction_driving", "baidu_map:map_directions", "google_maps:maps_directions"]
WALK = ["amap:maps_direction_walking", "baidu_map:map_directions", "google_maps:maps_directions"]
TRANSIT = ["amap:maps_direction_transit_integrated", "baidu_map:map_directions",
           "google_maps:maps_directions"]
NEARBY = ["amap:maps_around_search", "amap:maps_text_search", "baidu_map:map_search_places",
          "google_maps:maps_search_places", "brave_search:brave_local_search"]
PLACE_DETAIL = ["amap:maps_search_detail", "baidu_map:map_place_details",
                "google_maps:maps_place_details"]
DISTANCE = ["amap:maps_distance", "baidu_map:map_distance_matrix",
            "google_maps:maps_distance_matrix"]
IPLOC = ["amap:maps_ip_location", "baidu_map:map_ip_location"]
WEB = ["baidu_search:baidu_ai_search", "baidu_search:baidu_ai_ask", "brave_search:brave_web_search",
       "tavily:tavily_search", "exa:web_search_exa", "firecrawl:firecrawl_search"]
NEWS = ["baidu_search:baidu_ai_news", "firecrawl:firecrawl_search", "tavily:tavily_search"]
STOCK_PRICE = ["a_stock:get_realtime_price"]
BRANCH_NEW = ["yunxiao:create_branch", "github:create_branch", "gitlab:create_branch",
              "git:git_create_branch", "git_cyanheads:git_branch"]
BRANCH_LIST = ["yunxiao:list_branches", "git:git_branch", "git_cyanheads:git_branch"]
COMMITS = ["yunxiao:list_commits", "github:list_commits", "git:git_log", "git_cyanheads:git_log"]
COMMIT = ["git:git_commit", "git_cyanheads:git_commit"]
STATUS = ["git:git_status", "git_cyanheads:git_status"]
DIFF = ["git:git_diff", "git:git_diff_unstaged", "git:git_diff_staged", "git_cyanheads:git_diff",
        "yunxiao:compare"]
PR_NEW = ["github:create_pull_request", "gitlab:create_merge_request",
          "yunxiao:create_change_request"]
PR_MERGE = ["github:merge_pull_request", "yunxiao:merge_change_request", "git_cyanheads:git_merge"]
ISSUE_NEW = ["github:create_issue", "gitlab:create_issue"]
REPO_NEW = ["github:create_repository", "gitlab:create_repository", "yunxiao:create_repository"]
SCREENSHOT = ["puppeteer:puppeteer_screenshot", "playwright:browser_take_screenshot",
              "chrome_devtools:take_screenshot", "browserbase:browserbase_screenshot",
              "playwright_ea:playwright_screenshot"]
NAVIGATE = ["puppeteer:puppeteer_navigate", "playwright:browser_navigate",
            "chrome_devtools:navigate_page", "chrome_devtools:new_page",
            "browserbase:browserbase_stagehand_navigate", "playwright_ea:playwright_navigate"]
CLICK = ["puppeteer:puppeteer_click", "playwright:browser_click", "chrome_devtools:click",
         "playwright_ea:playwright_click", "browserbase:browserbase_stagehand_act"]
FILL = ["puppeteer:puppeteer_fill", "playwright:browser_type", "playwright:browser_fill_form",
        "chrome_devtools:fill", "chrome_devtools:fill_form", "chrome_devtools:type_text",
        "playwright_ea:playwright_fill"]
DIALOG = ["playwright:browser_handle_dialog", "chrome_devtools:handle_dialog"]
BACK = ["playwright:browser_navigate_back", "playwright_ea:playwright_go_back",
        "chrome_devtools:navigate_page"]
JS = ["puppeteer:puppeteer_evaluate", "playwright:browser_evaluate",
      "chrome_devtools:evaluate_script", "playwright_ea:playwright_evaluate",
      "playwright:browser_run_code_unsafe"]
CONSOLE = ["playwright:browser_console_messages", "chrome_devtools:list_console_messages",
           "chrome_devtools:get_console_message", "playwright_ea:playwright_console_logs"]
NETWORK = ["playwright:browser_network_requests", "chrome_devtools:list_network_requests",
           "playwright:browser_network_request", "chrome_devtools:get_network_request"]
UPLOAD = ["playwright:browser_file_upload", "chrome_devtools:upload_file",
          "playwright_ea:playwright_upload_file"]
HOVER = ["puppeteer:puppeteer_hover", "playwright:browser_hover", "chrome_devtools:hover",
         "playwright_ea:playwright_hover"]
KEY = ["playwright:browser_press_key", "chrome_devtools:press_key", "playwright_ea:playwright_press_key"]
RESIZE = ["playwright:browser_resize", "chrome_devtools:resize_page", "playwright_ea:playwright_resize"]
DRAG = ["playwright:browser_drag", "chrome_devtools:drag", "playwright_ea:playwright_drag"]
SELECT = ["puppeteer:puppeteer_select", "playwright:browser_select_option", "chrome_devtools:fill",
          "playwright_ea:playwright_select"]
PAGE_TEXT = ["playwright_ea:playwright_get_visible_text", "playwright:browser_snapshot",
             "chrome_devtools:take_snapshot", "browserbase:browserbase_stagehand_extract",
             "playwright_ea:playwright_get_visible_html"]
READ_FILE = ["filesystem:read_text_file", "filesystem:read_file", "desktop_commander:read_file"]
WRITE_FILE = ["filesystem:write_file", "desktop_commander:write_file"]
EDIT_FILE = ["filesystem:edit_file", "desktop_commander:edit_block"]
LIST_DIR = ["filesystem:list_directory", "filesystem:directory_tree",
            "filesystem:list_directory_with_sizes", "desktop_commander:list_directory"]
MKDIR = ["filesystem:create_directory", "desktop_commander:create_directory"]
MOVE = ["filesystem:move_file", "desktop_commander:move_file"]
FIND_FILE = ["filesystem:search_files", "desktop_commander:start_search"]
FILE_INFO = ["filesystem:get_file_info", "desktop_commander:get_file_info"]
SCRAPE = ["firecrawl:firecrawl_scrape", "fetch:fetch", "exa:web_fetch_exa", "tavily:tavily_extract"]
CRAWL = ["firecrawl:firecrawl_crawl", "tavily:tavily_crawl"]
SITEMAP = ["firecrawl:firecrawl_map", "tavily:tavily_map"]
PAPERS = ["firecrawl:firecrawl_research_search_papers"]
K8S_LOGS = ["kubernetes:kubectl_logs"]
K8S_GET = ["kubernetes:kubectl_get", "kubernetes:kubectl_describe"]
PROCS = ["desktop_commander:list_processes"]
SLACK_POST = ["slack:slack_post_message"]
LARK_SEND = ["lark:im_v1_message_create"]
PAY = ["alipayplus:create_payment"]
REFUND = ["alipayplus:create_refund"]
TIME_NOW = ["time:get_current_time"]
TZ = ["time:convert_time"]

# (language, request, tools that serve it as "server:tool"; none: no tool does)
REQUESTS = [
    # ---- Chinese requests, Chinese-described tools ----
    ("zh", "把北京西站的地址转成坐标", GEO),
    ("zh", "上海东方明珠在地图上的经纬度", GEO),
    ("zh", "帮我把这个地址解析成经纬度：杭州市西湖区文三路", GEO),
    ("zh", "坐标 121.47,31.23 对应哪个区", REGEO),
    ("zh", "我手机定位给的经纬度，换成街道名称", REGEO),
    ("zh", "根据经纬度反查地址", REGEO),
    ("zh", "广州这周末天气如何", WEATHER),
    ("zh", "成都明天气温多少度", WEATHER),
    ("zh", "现在外面多少度", NOW_WEATHER),
    ("zh", "此刻深圳刮风吗", NOW_WEATHER),
    ("zh", "未来24小时每小时的天气", ["qweather:get_hourly_weather"]),
    ("zh", "半小时内会下雨吗，我要出门", ["qweather:get_minutely_5m"]),
    ("zh", "过去一周北京的天气记录", ["qweather:get_weather_history"]),
    ("zh", "上周的空气质量怎么样", ["qweather:get_air_quality_history"]),
    ("zh", "南京有没有暴雨预警", ["qweather:get_warning"]),
    ("zh", "台风预警发布了吗", ["qweather:get_warning"]),
    ("zh", "今天穿什么衣服合适", ["qweather:get_indices"]),
    ("zh", "今天紫外线强不强", ["qweather:get_indices"]),
    ("zh", "后天早上太阳几点升起", ["qweather:get_astronomy_sun"]),
    ("zh", "今晚的月相是什么", ["qweather:get_astronomy_moon"]),
    ("zh", "雾霾严重吗，AQI是多少", ["qweather:get_air_quality"]),
    ("zh", "从虹桥机场开车到外滩怎么走", DRIVE),
    ("zh", "自驾去黄山的路线", DRIVE),
    ("zh", "走路去最近的地铁站要多久", WALK),
    ("zh", "步行到西湖的路线", WALK),
    ("zh", "坐公交去动物园怎么走", TRANSIT),
    ("zh", "乘地铁从国贸到中关村的换乘方案", TRANSIT),
    ("zh", "骑电动车去公司的路线", ["amap:maps_bicycling"]),
    ("zh", "附近的咖啡店", NEARBY),
    ("zh", "这一带有没有药店", NEARBY),
    ("zh", "搜一下杭州的酒店", NEARBY),
    ("zh", "这家餐厅的营业时间和电话", PLACE_DETAIL),
    ("zh", "查看这个地点的详细信息", PLACE_DETAIL),
    ("zh", "北京到上海的直线距离", DISTANCE),
    ("zh", "从家到三个候选地点分别多远", DISTANCE),
    ("zh", "查一下这个IP是哪里的", IPLOC),
    ("zh", "延安高架现在拥堵吗", ["baidu_map:map_road_traffic"]),
    ("zh", "从一段文字里识别出地点并标注", ["baidu_map:map_poi_extract"]),
    ("zh", "晚饭吃什么，我们四个人", ["howtocook:mcp_howtocook_whatToEat",
                                  "howtocook:mcp_howtocook_recommendMeals"]),
    ("zh", "给我看所有菜谱", ["howtocook:mcp_howtocook_getAllRecipes"]),
    ("zh", "早餐有什么可以做的", ["howtocook:mcp_howtocook_getRecipesByCategory"]),
    ("zh", "西红柿炒鸡蛋的步骤", ["howtocook:mcp_howtocook_getRecipeById"]),
    ("zh", "我不吃辣，帮我规划一周三餐", ["howtocook:mcp_howtocook_recommendMeals"]),
    ("zh", "贵州茅台这会儿多少钱一股", STOCK_PRICE),
    ("zh", "查一下000001的实时行情", STOCK_PRICE),
    ("zh", "今天大盘怎么样，上证指数多少", ["a_stock:get_market_summary"]),
    ("zh", "这只股票过去一个月的走势", ["a_stock:get_stock_history"]),
    ("zh", "宁德时代的财报数据", ["a_stock:get_financial_data"]),
    ("zh", "这家公司属于什么行业，上市多久了", ["a_stock:get_stock_info"]),
    ("zh", "用百度搜一下最新的高考政策", WEB),
    ("zh", "帮我问问AI：光合作用的原理", ["baidu_search:baidu_ai_ask"]),
    ("zh", "最近有关人工智能的新闻", NEWS),
    ("zh", "新建一个部署单", ["yunxiao:create_change_order"]),
    ("zh", "查看部署单的日志", ["yunxiao:list_change_order_job_logs",
                         "yunxiao:find_task_operation_log"]),
    ("zh", "应用有哪些发布流程", ["yunxiao:list_app_release_workflows",
                          "yunxiao:list_app_release_workflow_briefs"]),
    ("zh", "跳过发布阶段的流水线", ["yunxiao:skip_app_release_stage_pipeline"]),
    ("zh", "重试失败的发布阶段流水线", ["yunxiao:retry_app_release_stage_pipeline"]),
    ("zh", "通过这个发布阶段的验证", ["yunxiao:pass_app_release_stage_validate"]),
    ("zh", "拒绝发布阶段的审核", ["yunxiao:refuse_app_release_stage_validate"]),
    ("zh", "新建一个测试用例", ["yunxiao:create_testcase"]),
    ("zh", "搜索登录相关的测试用例", ["yunxiao:search_testcases"]),
    ("zh", "删除这个测试用例", ["yunxiao:delete_testcase"]),
    ("zh", "测试计划执行进度如何", ["yunxiao:get_test_plan_progress"]),
    ("zh", "把这条用例的测试结果改成通过", ["yunxiao:update_test_result"]),
    ("zh", "列出所有测试计划", ["yunxiao:list_test_plans"]),
    ("zh", "帮我填一下今天花了六小时的工时", ["yunxiao:create_effort_record"]),
    ("zh", "我这个月填了多少工时", ["yunxiao:list_current_user_effort_records"]),
    ("zh", "录入预计工时", ["yunxiao:create_estimated_effort"]),
    ("zh", "用例库有哪些", ["yunxiao:list_test_repos"]),
    ("zh", "给测试用例写一条评论", ["yunxiao:create_testcase_comment",
                            "yunxiao:create_test_plan_testcase_comment"]),
    # ---- English requests, Chinese-described tools ----
    ("en", "what's the weather going to be like in Hangzhou this weekend", WEATHER),
    ("en", "is there a typhoon warning for Xiamen", ["qweather:get_warning"]),
    ("en", "will it rain in the next half hour", ["qweather:get_minutely_5m"]),
    ("en", "what time is sunset in Beijing today", ["qweather:get_astronomy_sun"]),
    ("en", "when does the moon rise tonight", ["qweather:get_astronomy_moon"]),
    ("en", "how polluted is the air in Chengdu right now", ["qweather:get_air_quality"]),
    ("en", "is today a good day for outdoor sports", ["qweather:get_indices"]),
    ("en", "hourly forecast for the next three days", ["qweather:get_hourly_weather"]),
    ("en", "what was the weather like in Shanghai last week", ["qweather:get_weather_history"]),
    ("en", "the current temperature and humidity outside", NOW_WEATHER),
    ("en", "turn this street address into latitude and longitude", GEO),
    ("en", "which district are these coordinates in", REGEO),
    ("en", "walking route from the hotel to the museum", WALK),
    ("en", "bike route to the lake, avoiding flyovers", ["amap:maps_bicycling"]),
    ("en", "take the subway and bus from the station to the stadium", TRANSIT),
    ("en", "find gas stations within 3 km of me", NEARBY),
    ("en", "how congested is the ring road right now", ["baidu_map:map_road_traffic"]),
    ("en", "locate this IP address on the map", IPLOC),
    ("en", "pull the place names out of this paragraph and tag them", ["baidu_map:map_poi_extract"]),
    ("en", "suggest a dinner menu for five people", ["howtocook:mcp_howtocook_whatToEat",
                                                    "howtocook:mcp_howtocook_recommendMeals"]),
    ("en", "list every recipe you know", ["howtocook:mcp_howtocook_getAllRecipes"]),
    ("en", "show me the soup recipes", ["howtocook:mcp_howtocook_getRecipesByCategory"]),
    ("en", "how do I cook mapo tofu, step by step", ["howtocook:mcp_howtocook_getRecipeById"]),
    ("en", "a weekly meal plan with a shopping list, no seafood",
     ["howtocook:mcp_howtocook_recommendMeals"]),
    ("en", "what is Kweichow Moutai trading at right now", STOCK_PRICE),
    ("en", "price history of this A-share over the last quarter", ["a_stock:get_stock_history"]),
    ("en", "revenue and profit figures for this listed company", ["a_stock:get_financial_data"]),
    ("en", "basic profile of stock 600519", ["a_stock:get_stock_info"]),
    ("en", "latest news about electric vehicles in China", NEWS),
    ("en", "ask Baidu's AI to explain how vaccines work", ["baidu_search:baidu_ai_ask"]),
    ("en", "create a deployment order for the staging environment", ["yunxiao:create_change_order"]),
    ("en", "show me the logs of the environment deployment order",
     ["yunxiao:list_change_order_job_logs", "yunxiao:find_task_operation_log"]),
    ("en", "approve the release stage validation", ["yunxiao:pass_app_release_stage_validate"]),
    ("en", "cancel the running release stage", ["yunxiao:cancel_app_release_stage_execution"]),
    ("en", "create a test case for the checkout flow", ["yunxiao:create_testcase"]),
    ("en", "how far along is the test plan: passed, failed, pending",
     ["yunxiao:get_test_plan_progress"]),
    ("en", "log 3 hours of actual work on this task", ["yunxiao:create_effort_record"]),
    ("en", "record the estimated hours for the story", ["yunxiao:create_estimated_effort"]),
    ("en", "list the test case folders", ["yunxiao:list_testcase_directories"]),
    ("en", "mark the test result as failed", ["yunxiao:update_test_result"]),
    # ---- Chinese requests, English-described tools ----
    ("zh", "把这个文件的内容读给我", READ_FILE),
    ("zh", "打开配置文件看看里面写了什么", READ_FILE),
    ("zh", "一次读取这三个文件", ["filesystem:read_multiple_files",
                          "desktop_commander:read_multiple_files"]),
    ("zh", "新建一个文本文件，写入这段话", WRITE_FILE),
    ("zh", "把文件里的旧域名替换成新域名", EDIT_FILE),
    ("zh", "这个目录下都有什么文件", LIST_DIR),
    ("zh", "建一个叫备份的文件夹", MKDIR),
    ("zh", "把报告重命名为最终版", MOVE),
    ("zh", "在项目里找所有的日志文件", FIND_FILE),
    ("zh", "这个文件多大，什么时候修改的", FILE_INFO),
    ("zh", "以树状结构展示文件夹", ["filesystem:directory_tree"]),
    ("zh", "哪些目录允许访问", ["filesystem:list_allowed_directories"]),
    ("zh", "把这张图片以base64读出来", ["filesystem:read_media_file"]),
    ("zh", "生成一个PDF文件", ["desktop_commander:write_pdf"]),
    ("zh", "在终端里运行一个命令", ["desktop_commander:start_process"]),
    ("zh", "结束进程号为1234的进程", ["desktop_commander:kill_process"]),
    ("zh", "现在有哪些程序在运行", PROCS),
    ("zh", "看一下正在运行的程序输出了什么", ["desktop_commander:read_process_output"]),
    ("zh", "修改服务器的一个配置项", ["desktop_commander:set_config_value"]),
    ("zh", "打开这个网址", NAVIGATE),
    ("zh", "网页截个图", SCREENSHOT),
    ("zh", "点一下提交按钮", CLICK),
    ("zh", "在搜索框里输入关键词", FILL),
    ("zh", "把表单里的姓名和邮箱都填上", FILL),
    ("zh", "网页弹窗问是否离开，选是", DIALOG),
    ("zh", "返回上一页", BACK),
    ("zh", "在页面上执行一段JavaScript", JS),
    ("zh", "看看浏览器控制台有没有报错", CONSOLE),
    ("zh", "页面发出了哪些网络请求", NETWORK),
    ("zh", "在网页上传我的简历文件", UPLOAD),
    ("zh", "鼠标移到菜单上", HOVER),
    ("zh", "在页面上按下Tab键", KEY),
    ("zh", "浏览器窗口改成1280乘720", RESIZE),
    ("zh", "把这个卡片拖到另一栏", DRAG),
    ("zh", "下拉框里选择中国", SELECT),
    ("zh", "关掉这个网页", ["playwright:browser_close", "chrome_devtools:close_page",
                       "playwright_ea:playwright_close"]),
    ("zh", "新开一个标签页", ["playwright:browser_tabs", "chrome_devtools:new_page"]),
    ("zh", "把当前网页另存为PDF", ["playwright_ea:playwright_save_as_pdf"]),
    ("zh", "用Lighthouse给网站打分", ["chrome_devtools:lighthouse_audit"]),
    ("zh", "录制网页性能追踪", ["chrome_devtools:performance_start_trace"]),
    ("zh", "抓取内存堆快照", ["chrome_devtools:take_heapsnapshot"]),
    ("zh", "给页面录个屏", ["chrome_devtools:screencast_start"]),
    ("zh", "等页面出现加载完成几个字", ["playwright:browser_wait_for", "chrome_devtools:wait_for"]),
    ("zh", "这个元素用了哪些CSS样式", ["chrome_devtools:get_css_styles"]),
    ("zh", "发一个HTTP POST请求", ["playwright_ea:playwright_post"]),
    ("zh", "把网页内容抓下来转成markdown", SCRAPE),
    ("zh", "把整个网站爬一遍", CRAWL),
    ("zh", "这个站点下有哪些页面地址", SITEMAP),
    ("zh", "查一下关于大模型推理的论文", PAPERS),
    ("zh", "提交代码", COMMIT),
    ("zh", "看看哪些文件改了还没提交", STATUS),
    ("zh", "对比两个分支的差异", DIFF),
    ("zh", "最近的提交记录", COMMITS),
    ("zh", "新建一个功能分支", BRANCH_NEW),
    ("zh", "把远程的更新拉下来", ["git_cyanheads:git_pull", "git_cyanheads:git_fetch"]),
    ("zh", "推送到远程仓库", ["git_cyanheads:git_push", "github:push_files",
                         "gitlab:push_files"]),
    ("zh", "克隆这个仓库到本地", ["git_cyanheads:git_clone"]),
    ("zh", "这行代码是谁写的", ["git_cyanheads:git_blame"]),
    ("zh", "打个版本标签v1.2", ["git_cyanheads:git_tag", "yunxiao:create_app_tag"]),
    ("zh", "撤销暂存的改动", ["git:git_reset", "git_cyanheads:git_reset"]),
    ("zh", "把某个提交挑到当前分支", ["git_cyanheads:git_cherry_pick"]),
    ("zh", "在GitHub上提一个问题单", ISSUE_NEW),
    ("zh", "创建合并请求", PR_NEW),
    ("zh", "合并这个拉取请求", PR_MERGE),
    ("zh", "在GitHub上找用户名叫张三的人", ["github:search_users"]),
    ("zh", "给这个议题加一条评论", ["github:add_issue_comment"]),
    ("zh", "这次拉取请求改了哪些文件", ["github:get_pull_request_files"]),
    ("zh", "复刻这个仓库到我的账号", ["github:fork_repository", "gitlab:fork_repository"]),
    ("zh", "新建一个代码仓库", REPO_NEW),
    ("zh", "看看Pod的日志", K8S_LOGS),
    ("zh", "把部署扩容到五个副本", ["kubernetes:kubectl_scale"]),
    ("zh", "列出集群里所有的Pod", ["kubernetes:kubectl_get"]),
    ("zh", "安装一个Helm chart", ["kubernetes:install_helm_chart"]),
    ("zh", "在容器里执行命令", ["kubernetes:exec_in_pod"]),
    ("zh", "把本地端口转发到服务", ["kubernetes:port_forward"]),
    ("zh", "回滚这次部署", ["kubernetes:kubectl_rollout"]),
    ("zh", "在Slack频道里发条消息", SLACK_POST),
    ("zh", "回复这个讨论串", ["slack:slack_reply_to_thread"]),
    ("zh", "给这条消息点个赞", ["slack:slack_add_reaction"]),
    ("zh", "频道里最近聊了什么", ["slack:slack_get_channel_history"]),
    ("zh", "在飞书群里发一条通知", LARK_SEND),
    ("zh", "创建一个飞书群聊", ["lark:im_v1_chat_create"]),
    ("zh", "多维表格里新增一条记录", ["lark:bitable_v1_appTableRecord_create"]),
    ("zh", "在知识库里搜索报销流程", ["lark:wiki_v1_node_search"]),
    ("zh", "用邮箱查飞书用户的ID", ["lark:contact_v3_user_batchGetId"]),
    ("zh", "导入一个文档到飞书", ["lark:docx_builtin_import"]),
    ("zh", "在Notion里新建一个页面", ["notion:API-post-page"]),
    ("zh", "在Notion里按标题搜索", ["notion:API-post-search"]),
    ("zh", "给Notion页面加评论", ["notion:API-create-a-comment"]),
    ("zh", "在知识图谱里新建实体", ["memory:create_entities"]),
    ("zh", "搜索记忆里关于张三的节点", ["memory:search_nodes"]),
    ("zh", "现在东京几点", TIME_NOW),
    ("zh", "把北京时间下午三点换算成纽约时间", TZ),
    ("zh", "两个数相加", ["everything:get-sum"]),
    ("zh", "生成一张日落海滩的图片", ["everart:generate_image"]),
    ("zh", "退款给这笔订单", REFUND),
    ("zh", "发起一笔支付", PAY),
    ("zh", "查询这笔付款的状态", ["alipayplus:query_payment"]),
    ("zh", "取消这笔支付", ["alipayplus:cancel_payment"]),
    ("zh", "报关申报", ["alipayplus:customs_declare"]),
    ("zh", "查一下Sentry里最近的报错", ["sentry:search_issues", "sentry:search_events"]),
    ("zh", "查找React最新的文档", ["context7:query-docs", "context7:resolve-library-id"]),
    ("zh", "流水线再跑一次", ["yunxiao:create_pipeline_run", "yunxiao:retry_pipeline_job_run",
                        "yunxiao:rerun_pipeline_job_run"]),
    ("zh", "停止正在运行的流水线任务", ["yunxiao:stop_pipeline_job_run"]),
    ("zh", "开一个新的冲刺周期", ["yunxiao:create_sprint"]),
    ("zh", "创建一个工作项，标题是修复登录", ["yunxiao:create_work_item"]),
    # ---- English requests, English-described tools ----
    ("en", "show me what's in notes.txt", READ_FILE),
    ("en", "save this text to a new file called todo.md", WRITE_FILE),
    ("en", "replace every occurrence of foo with bar in main.py", EDIT_FILE),
    ("en", "make a folder named archive", MKDIR),
    ("en", "rename draft.docx to final.docx", MOVE),
    ("en", "where is the file called invoice somewhere under my projects", FIND_FILE),
    ("en", "when was this file last modified", FILE_INFO),
    ("en", "which folders am I allowed to touch", ["filesystem:list_allowed_directories"]),
    ("en", "turn this report into a PDF document", ["desktop_commander:write_pdf"]),
    ("en", "run npm install in a terminal", ["desktop_commander:start_process"]),
    ("en", "kill the process with PID 4242", ["desktop_commander:kill_process"]),
    ("en", "which programs are running right now", PROCS),
    ("en", "type a line into the running python REPL", ["desktop_commander:interact_with_process"]),
    ("en", "what tools did I call recently", ["desktop_commander:get_recent_tool_calls"]),
    ("en", "go to example.com in the browser", NAVIGATE),
    ("en", "capture the visible browser tab as an image", SCREENSHOT),
    ("en", "press the login button", CLICK),
    ("en", "type my email address into the sign-up field", FILL),
    ("en", "dismiss the alert that popped up", DIALOG),
    ("en", "go back one page", BACK),
    ("en", "run document.title in the page", JS),
    ("en", "any errors in the browser console?", CONSOLE),
    ("en", "list the XHR requests the page fired", NETWORK),
    ("en", "attach my resume to the upload field", UPLOAD),
    ("en", "move the mouse over the profile menu", HOVER),
    ("en", "hit the Escape key", KEY),
    ("en", "make the window 375 pixels wide like a phone", RESIZE),
    ("en", "pick 'Germany' from the country dropdown", SELECT),
    ("en", "what text is visible on the page", PAGE_TEXT),
    ("en", "switch the page to dark mode", ["playwright:browser_emulate_media",
                                            "chrome_devtools:emulate"]),
    ("en", "audit the site's accessibility and SEO scores", ["chrome_devtools:lighthouse_audit"]),
    ("en", "why is the page slow to load? record a trace", ["chrome_devtools:performance_start_trace"]),
    ("en", "check the page for memory leaks", ["chrome_devtools:take_heapsnapshot"]),
    ("en", "capture a screen recording of the tab", ["chrome_devtools:screencast_start"]),
    ("en", "print this page to PDF", ["playwright_ea:playwright_save_as_pdf"]),
    ("en", "send a PUT request to the API", ["playwright_ea:playwright_put"]),
    ("en", "pretend to be an iPhone browser user agent", ["playwright_ea:playwright_custom_user_agent"]),
    ("en", "record my clicks and turn them into a Playwright test",
     ["playwright_ea:start_codegen_session"]),
    ("en", "start a cloud browser session", ["browserbase:browserbase_session_create"]),
    ("en", "get the main text of this article as markdown", SCRAPE),
    ("en", "crawl the whole docs site", CRAWL),
    ("en", "list all URLs on this website", SITEMAP),
    ("en", "find papers about retrieval augmented generation", PAPERS),
    ("en", "papers that cite this one", ["firecrawl:firecrawl_research_related_papers"]),
    ("en", "watch this page and tell me when it changes", ["firecrawl:firecrawl_monitor_create"]),
    ("en", "how many Firecrawl credits do I have left", ["firecrawl:firecrawl_credit_usage"]),
    ("en", "deep research report on solid-state batteries", ["tavily:tavily_research",
                                                             "firecrawl:firecrawl_agent",
                                                             "everything:simulate-research-query"]),
    ("en", "search the internet for the best hiking boots", WEB),
    ("en", "restaurants near Times Square", NEARBY),
    ("en", "what is the altitude of Lhasa", ["google_maps:maps_elevation"]),
    ("en", "commit my staged changes with the message 'fix typo'", COMMIT),
    ("en", "what did I change but not stage yet", ["git:git_diff_unstaged", "git_cyanheads:git_diff",
                                                   "git_cyanheads:git_status", "git:git_status"]),
    ("en", "move HEAD back one commit, keep my edits", ["git:git_reset", "git_cyanheads:git_reset"]),
    ("en", "who last touched line 42 of server.rs", ["git_cyanheads:git_blame"]),
    ("en", "apply that one fix from the release branch here", ["git_cyanheads:git_cherry_pick"]),
    ("en", "replay my branch on top of main", ["git_cyanheads:git_rebase"]),
    ("en", "delete untracked files from the working tree", ["git_cyanheads:git_clean"]),
    ("en", "download the latest changes from origin", ["git_cyanheads:git_pull",
                                                       "git_cyanheads:git_fetch"]),
    ("en", "add a second checkout of the repo in another folder", ["git_cyanheads:git_worktree"]),
    ("en", "draft release notes from recent commits", ["git_cyanheads:git_changelog_analyze"]),
    ("en", "open an issue about the broken build", ISSUE_NEW),
    ("en", "propose my branch for review", PR_NEW),
    ("en", "which CI checks passed on this PR", ["github:get_pull_request_status"]),
    ("en", "approve the pull request with a comment", ["github:create_pull_request_review",
                                                       "yunxiao:review_change_request"]),
    ("en", "find code that calls parse_config across GitHub", ["github:search_code"]),
    ("en", "close issue #12", ["github:update_issue", "sentry:update_issue"]),
    ("en", "bring the PR branch up to date with main", ["github:update_pull_request_branch"]),
    ("en", "show the pod logs for the api deployment", K8S_LOGS),
    ("en", "describe the failing pod", ["kubernetes:kubectl_describe"]),
    ("en", "apply this YAML manifest to the cluster", ["kubernetes:kubectl_apply"]),
    ("en", "drain the node before maintenance", ["kubernetes:node_management"]),
    ("en", "switch kubectl to the production context", ["kubernetes:kubectl_context"]),
    ("en", "remove the helm release", ["kubernetes:uninstall_helm_chart"]),
    ("en", "what fields does a Deployment spec have", ["kubernetes:explain_resource"]),
    ("en", "tell the team channel the deploy is done", SLACK_POST + LARK_SEND),
    ("en", "who is in the workspace", ["slack:slack_get_users"]),
    ("en", "read the replies under that thread", ["slack:slack_get_thread_replies"]),
    ("en", "list the fields of the Base table", ["lark:bitable_v1_appTableField_list"]),
    ("en", "get the plain text of this Feishu document", ["lark:docx_v1_document_rawContent"]),
    ("en", "give my colleague edit access to the doc", ["lark:drive_v1_permissionMember_create"]),
    ("en", "who is in this group chat", ["lark:im_v1_chatMembers_get"]),
    ("en", "append a paragraph to the Notion page", ["notion:API-patch-block-children",
                                                     "notion:API-update-page-markdown"]),
    ("en", "get the Notion page as markdown", ["notion:API-retrieve-page-markdown"]),
    ("en", "query the tasks database for items due this week", ["notion:API-query-data-source"]),
    ("en", "note in memory that Alice works at Acme Corp", ["memory:create_entities",
                                                 "memory:add_observations",
                                                 "memory:create_relations"]),
    ("en", "forget everything about Bob", ["memory:delete_entities"]),
    ("en", "show the whole knowledge graph", ["memory:read_graph"]),
    ("en", "what time is it in Sydney", TIME_NOW),
    ("en", "convert 9am London time to Tokyo", TZ),
    ("en", "think through this problem step by step", ["sequential_thinking:sequentialthinking"]),
    ("en", "draw a logo of a fox", ["everart:generate_image"]),
    ("en", "what environment variables does the server see", ["everything:get-env"]),
    ("en", "charge the customer 20 dollars", PAY),
    ("en", "give the buyer their money back", REFUND),
    ("en", "did the payment go through", ["alipayplus:query_payment"]),
    ("en", "root-cause this production error with AI", ["sentry:analyze_issue_with_seer"]),
    ("en", "which Sentry projects do we have", ["sentry:find_projects"]),
    ("en", "up-to-date docs for the tokio crate", ["context7:query-docs",
                                                   "context7:resolve-library-id"]),
    ("en", "ask the AWS knowledge base about our refund policy", ["aws_kb:retrieve_from_aws_kb"]),
    ("en", "rerun the failed pipeline job", ["yunxiao:retry_pipeline_job_run",
                                             "yunxiao:rerun_pipeline_job_run"]),
    ("en", "generate the YAML for a build pipeline", ["yunxiao:generate_pipeline_yaml"]),
    ("en", "create a sprint for next two weeks", ["yunxiao:create_sprint"]),
    ("en", "list the members of our organization", ["yunxiao:list_organization_members",
                                                    "yunxiao:search_organization_members"]),
    ("en", "delete the release branch in Codeup", ["yunxiao:delete_branch"]),
    # ---- requests no tool of the catalog serves ----
    ("zh", "帮我订一间明晚的酒店", []),
    ("zh", "给我妈打个电话", []),
    ("zh", "把空调调到26度", []),
    ("zh", "明早七点叫我起床", []),
    ("zh", "播放一首轻音乐", []),
    ("zh", "帮我叫一辆去机场的出租车", []),
    ("zh", "点一份麦当劳外卖", []),
    ("zh", "给老板发一封请假邮件", []),
    ("zh", "买两张今晚的电影票", []),
    ("zh", "把客厅的窗帘拉上", []),
    ("zh", "帮我缴这个季度的水费", []),
    ("zh", "预约明天下午的理发", []),
    ("zh", "扫地机器人开始打扫", []),
    ("zh", "给我老婆发条短信说我晚点回家", []),
    ("zh", "订一张下周去成都的机票", []),
    ("zh", "设一个25分钟的番茄钟", []),
    ("zh", "帮我挂个明天的门诊号", []),
    ("zh", "把这段中文翻译成法语", []),
    ("zh", "今天走了多少步", []),
    ("zh", "帮我转账500元给小王", []),
    ("zh", "打开车库门", []),
    ("zh", "查一下我的快递到哪了", []),
    ("zh", "帮我充话费", []),
    ("zh", "提醒我下午三点开会", []),
    ("zh", "把卧室的灯调暗一点", []),
    ("zh", "帮我在京东买一箱牛奶", []),
    ("zh", "预订周六晚上两个人的餐厅位子", []),
    ("zh", "记录一下今天喝了八杯水", []),
    ("zh", "帮我视频通话给爸爸", []),
    ("zh", "把热水器打开", []),
    ("en", "book me a hotel room in Paris for Friday", []),
    ("en", "call my dentist", []),
    ("en", "make the living room warmer by two degrees", []),
    ("en", "wake me up at 6:30 tomorrow", []),
    ("en", "play some jazz on the kitchen speaker", []),
    ("en", "order sushi for delivery", []),
    ("en", "get me an Uber to the airport", []),
    ("en", "email the invoice to my accountant", []),
    ("en", "buy two tickets for the concert on Saturday", []),
    ("en", "lock the back door for the night", []),
    ("en", "pay my phone bill", []),
    ("en", "schedule a haircut for next Tuesday", []),
    ("en", "start the robot vacuum", []),
    ("en", "text Sarah that I'm running late", []),
    ("en", "book a flight to Berlin next month", []),
    ("en", "start a 10 minute timer", []),
    ("en", "how many calories did I burn today", []),
    ("en", "send 50 euros to my brother", []),
    ("en", "open the garage", []),
    ("en", "where is my Amazon package", []),
    ("en", "top up my transit card", []),
    ("en", "remind me to water the plants at 8pm", []),
    ("en", "dim the bedroom lights", []),
    ("en", "reserve a table for four at an Italian place tonight", []),
    ("en", "log my run of 5 kilometres", []),
    ("en", "video call grandma", []),
    ("en", "turn on the coffee machine", []),
    ("en", "renew my library books", []),
    ("en", "cancel my gym membership", []),
    ("en", "add milk to my shopping list", []),
]


def check(catalogs, earlier):
    """Every expected tool exists in the catalog; no request repeats, here or in earlier sets."""
    have, zh_described = set(), set()
    for path in catalogs:
        for s in json.load(open(path))["servers"]:
            for t in s["tools"]:
                name = f"{s['name']}:{t['name']}"
                have.add(name)
                if any("\u4e00" <= c <= "\u9fff" for c in t.get("description") or ""):
                    zh_described.add(name)
    seen = set(earlier)
    for lang, q, expect in REQUESTS:
        assert lang in ("en", "zh") and q, q
        assert q not in seen, f"{q} is in an earlier set or twice here"
        seen.add(q)
        for e in expect:
            assert e in have, f"{e} ({q}) is not in the catalog"
    return zh_described


def described(expect, zh_described):
    """The stratum of a request by its first expected tool's description language."""
    if not expect:
        return "none"
    return "zh" if expect[0] in zh_described else "en"


def main():
    earlier = []
    for name in ("dev.json", "test.json", "mixed-dev.json", "mixed-test.json"):
        earlier += [r["query"] for r in json.load(open(os.path.join(FIX, "eval", name)))]
    zh_described = check([os.path.join(FIX, "tools.json"), os.path.join(FIX, "mixed-tools.json")],
                         earlier)
    rng = random.Random(20261130)
    dev, test = [], []
    for lang in ("en", "zh"):
        for desc in ("en", "zh", "none"):
            stratum = [r for r in REQUESTS
                       if r[0] == lang and described(r[2], zh_described) == desc]
            rng.shuffle(stratum)
            half = (len(stratum) + 1) // 2
            for rows, part in ((dev, stratum[:half]), (test, stratum[half:])):
                rows += [{"query": q, "lang": l,
                          "expect": [dict(zip(("server", "tool"), e.split(":", 1))) for e in x]}
                         for l, q, x in part]
    for name, rows in (("dev2.json", dev), ("test2.json", test)):
        with open(os.path.join(FIX, "eval", name), "w") as f:
            json.dump(rows, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print(name, len(rows), "requests,", sum(1 for r in rows if not r["expect"]), "negatives,",
              sum(1 for r in rows if r["lang"] == "zh"), "Chinese")


if __name__ == "__main__":
    main()

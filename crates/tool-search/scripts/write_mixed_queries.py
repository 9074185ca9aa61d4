"""Writes the mixed-language evaluation: requests in Chinese and English against a catalog in
which Chinese vendors' servers (fixtures/mixed-tools.json: most described in Chinese, some in
English, one in both) sit beside the 360 English-described tools of fixtures/tools.json.

Each request has a paraphrase (same need, other words): the learning-from-use measure replays
some requests as past use and scores the paraphrases. Split 50/50 into eval/mixed-dev.json and
eval/mixed-test.json with a fixed seed, per (language, answerable) stratum, before any tuning.

Usage: python3 crates/tool-search/scripts/write_mixed_queries.py
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
WEB = ["baidu_search:baidu_ai_search", "baidu_search:baidu_ai_ask", "brave_search:brave_web_search",
       "tavily:tavily_search", "exa:web_search_exa", "firecrawl:firecrawl_search"]
BRANCH = ["yunxiao:create_branch", "github:create_branch", "gitlab:create_branch",
          "git:git_create_branch", "git_cyanheads:git_branch"]
MERGE = ["yunxiao:merge_change_request", "github:merge_pull_request", "git_cyanheads:git_merge"]
DIALOG = ["playwright:browser_handle_dialog", "chrome_devtools:handle_dialog"]
LIST_DIR = ["filesystem:list_directory", "filesystem:directory_tree",
            "filesystem:list_directory_with_sizes", "desktop_commander:list_directory"]
READ_FILE = ["filesystem:read_text_file", "filesystem:read_file", "desktop_commander:read_file"]

# (language, request, paraphrase, tools that serve it as "server:tool"; none: no tool does)
REQUESTS = [
    # Chinese-described tools, Chinese requests
    ("zh", "这个坐标 116.48,39.99 是哪条街", "把这组经纬度转成具体地址", REGEO),
    ("zh", "故宫的经纬度是多少", "帮我查一下天安门的坐标", GEO),
    ("zh", "明天上海会下雨吗", "杭州后天天气怎么样", WEATHER),
    ("zh", "从公司骑自行车回家怎么走", "规划一条骑车去西湖的路线", ["amap:maps_bicycling"]),
    ("zh", "开车从北京到天津走哪条路最快", "帮我规划自驾去苏州的路线",
     ["amap:maps_direction_driving", "baidu_map:map_directions", "google_maps:maps_directions"]),
    ("zh", "坐地铁去机场怎么换乘", "乘公交从火车站到博物馆怎么坐",
     ["amap:maps_direction_transit_integrated", "baidu_map:map_directions",
      "google_maps:maps_directions"]),
    ("zh", "附近有什么好吃的餐厅", "我周围两公里内有没有加油站",
     ["amap:maps_around_search", "amap:maps_text_search", "baidu_map:map_search_places",
      "google_maps:maps_search_places", "brave_search:brave_local_search"]),
    ("zh", "这两个地点之间相距多远", "测一下两地之间的距离",
     ["amap:maps_distance", "baidu_map:map_distance_matrix", "google_maps:maps_distance_matrix"]),
    ("zh", "二环路现在堵不堵", "查一下长安街的实时路况", ["baidu_map:map_road_traffic"]),
    ("zh", "这个IP地址在哪个城市", "根据IP查一下所在地",
     ["amap:maps_ip_location", "baidu_map:map_ip_location"]),
    ("zh", "今晚做什么菜好", "不知道吃啥，给三个人推荐几道菜",
     ["howtocook:mcp_howtocook_whatToEat", "howtocook:mcp_howtocook_recommendMeals"]),
    ("zh", "红烧肉怎么做", "给我宫保鸡丁的详细做法", ["howtocook:mcp_howtocook_getRecipeById"]),
    ("zh", "帮我安排下周一家人的饮食，孩子对花生过敏", "做一份一周的菜单和购物清单",
     ["howtocook:mcp_howtocook_recommendMeals"]),
    ("zh", "有哪些甜品的做法", "列出所有汤类菜谱", ["howtocook:mcp_howtocook_getRecipesByCategory"]),
    ("zh", "搜一下最近关于新能源汽车的新闻", "今天有什么科技新闻", ["baidu_search:baidu_ai_news"]),
    ("zh", "上网查查量子计算是什么", "在网上搜索一下这部电影的评价", WEB),
    ("zh", "北京今天空气质量怎么样", "上海的PM2.5指数是多少", ["qweather:get_air_quality"]),
    ("zh", "有没有台风预警", "广州现在有暴雨警报吗", ["qweather:get_warning"]),
    ("zh", "今天适合洗车吗", "看看今天的穿衣指数", ["qweather:get_indices"]),
    ("zh", "明天几点日出", "今天太阳几点落山", ["qweather:get_astronomy_sun"]),
    ("zh", "接下来两个小时会不会下雨", "未来一小时的降水预报",
     ["qweather:get_minutely_5m", "qweather:get_hourly_weather"]),
    ("zh", "茅台现在股价多少", "查一下平安银行的实时股价", ["a_stock:get_realtime_price"]),
    ("zh", "今天大盘怎么样", "上证指数现在多少点", ["a_stock:get_market_summary"]),
    ("zh", "看看这只股票过去一个月的走势", "给我比亚迪近半年的历史行情", ["a_stock:get_stock_history"]),
    ("zh", "查一下这家公司的财报", "贵州茅台去年的营收和利润是多少", ["a_stock:get_financial_data"]),
    ("zh", "创建一个部署单把新版本发到生产环境", "新建一个部署单", ["yunxiao:create_change_order"]),
    ("zh", "查一下测试计划的执行进度", "这个测试计划通过了多少用例", ["yunxiao:get_test_plan_progress"]),
    ("zh", "新建一条测试用例", "帮我加一个测试用例", ["yunxiao:create_testcase"]),
    ("zh", "登记今天的实际工时", "记录我今天在这个任务上花了三小时", ["yunxiao:create_effort_record"]),
    ("zh", "查询部署任务的执行日志", "看看这次部署失败的日志",
     ["yunxiao:find_task_operation_log", "yunxiao:list_change_order_job_logs",
      "yunxiao:get_machine_deploy_log"]),
    # Chinese-described tools, English requests
    ("en", "what's the weather in Shanghai tomorrow", "will it rain in Hangzhou this weekend", WEATHER),
    ("en", "how do I cook braised pork belly", "give me the recipe for kung pao chicken",
     ["howtocook:mcp_howtocook_getRecipeById"]),
    ("en", "what's the air quality index in Beijing right now", "how polluted is the air in Chengdu today",
     ["qweather:get_air_quality"]),
    ("en", "current share price of Kweichow Moutai", "how much is BYD stock trading at",
     ["a_stock:get_realtime_price"]),
    ("en", "how is the Shanghai stock market doing today", "what is the Shenzhen index at",
     ["a_stock:get_market_summary"]),
    ("en", "plan a bike route to the lake", "cycling directions from home to the office",
     ["amap:maps_bicycling"]),
    ("en", "walking directions to the nearest subway station", "how do I get to the museum on foot",
     ["amap:maps_direction_walking", "baidu_map:map_directions", "google_maps:maps_directions"]),
    ("en", "is there a traffic jam on the ring road right now", "live congestion on Chang'an Avenue",
     ["baidu_map:map_road_traffic"]),
    ("en", "when does the sun rise tomorrow", "sunset time in Lhasa today", ["qweather:get_astronomy_sun"]),
    ("en", "any typhoon warnings for Guangzhou", "are there severe weather alerts in my city",
     ["qweather:get_warning"]),
    ("en", "what phase is the moon tonight", "when does the moon rise", ["qweather:get_astronomy_moon"]),
    ("en", "suggest a week of meals with a shopping list, no seafood",
     "meal plan for four people who avoid peanuts", ["howtocook:mcp_howtocook_recommendMeals"]),
    ("en", "log my actual working hours for this task", "record 3 hours of effort on the work item",
     ["yunxiao:create_effort_record"]),
    ("en", "show the progress of the test plan", "how many test cases passed in this plan",
     ["yunxiao:get_test_plan_progress"]),
    ("en", "latest news about electric cars", "today's technology headlines",
     ["baidu_search:baidu_ai_news", "brave_search:brave_web_search", "tavily:tavily_search"]),
    # English-described tools of the Chinese vendors, Chinese requests
    ("zh", "在飞书里给项目群发一条消息", "通过飞书通知大家明天开会", ["lark:im_v1_message_create"]),
    ("zh", "新建一个飞书群聊", "拉一个新的群", ["lark:im_v1_chat_create"]),
    ("zh", "看看这个群里有哪些人", "列出群成员", ["lark:im_v1_chatMembers_get"]),
    ("zh", "读取这篇云文档的正文", "把这个飞书文档的纯文本内容拿出来", ["lark:docx_v1_document_rawContent"]),
    ("zh", "在多维表格里新增一条记录", "往表格里加一行数据", ["lark:bitable_v1_appTableRecord_create"]),
    ("zh", "根据手机号查一下同事的用户ID", "用邮箱找到这个人的账号ID", ["lark:contact_v3_user_batchGetId"]),
    ("zh", "给这个文档加一个协作者", "把文档共享给张三编辑", ["lark:drive_v1_permissionMember_create"]),
    ("zh", "搜索知识库里关于报销的页面", "在wiki里找入职指南",
     ["lark:wiki_v1_node_search", "lark:docx_builtin_search", "notion:API-post-search"]),
    ("zh", "查看群里的聊天记录", "拉取这个会话的历史消息",
     ["lark:im_v1_message_list", "slack:slack_get_channel_history"]),
    ("zh", "给这笔订单发起退款", "用户要退钱，帮我退款", ["alipayplus:create_refund"]),
    ("zh", "查一下这笔支付成功了没有", "查询付款结果", ["alipayplus:query_payment"]),
    ("zh", "取消这笔还没付款的订单", "撤销这次支付", ["alipayplus:cancel_payment"]),
    ("zh", "向海关申报这笔跨境订单", "做一下报关", ["alipayplus:customs_declare"]),
    ("zh", "在代码库里新建一个分支", "从master拉一个feature分支", BRANCH),
    ("zh", "合并这个合并请求", "把这个MR合进主干", MERGE),
    ("zh", "重新运行失败的流水线任务", "重试一下挂掉的构建任务",
     ["yunxiao:retry_pipeline_job_run", "yunxiao:rerun_pipeline_job_run"]),
    ("zh", "查看流水线任务的运行日志", "看看这次构建的日志",
     ["yunxiao:get_pipeline_job_run_log", "yunxiao:get_pipeline_job_step_log"]),
    ("zh", "新建一个迭代", "开一个新的冲刺", ["yunxiao:create_sprint"]),
    ("zh", "给这个工作项写条评论", "在需求下面留言", ["yunxiao:create_work_item_comment"]),
    ("zh", "列出组织里的所有成员", "公司里都有哪些人",
     ["yunxiao:list_organization_members", "yunxiao:search_organization_members"]),
    ("zh", "审批通过流水线的人工卡点", "批准这次发布的人工审核",
     ["yunxiao:pass_pipeline_validate", "yunxiao:pass_app_release_stage_validate"]),
    # English-described tools of the Chinese vendors, English requests
    ("en", "send a message to the team group on Feishu", "post an update in the Lark chat",
     ["lark:im_v1_message_create"]),
    ("en", "refund this customer's payment", "give the buyer their money back", ["alipayplus:create_refund"]),
    ("en", "did this payment go through", "check the status of the transaction", ["alipayplus:query_payment"]),
    ("en", "add a row to the Base table", "insert a new record into the bitable",
     ["lark:bitable_v1_appTableRecord_create"]),
    ("en", "start a new sprint", "create an iteration for the next two weeks", ["yunxiao:create_sprint"]),
    ("en", "approve the manual checkpoint in the pipeline", "pass the human validation step",
     ["yunxiao:pass_pipeline_validate", "yunxiao:pass_app_release_stage_validate"]),
    ("en", "search the wiki for the onboarding guide", "find the expense policy page in our knowledge base",
     ["lark:wiki_v1_node_search", "lark:docx_builtin_search", "notion:API-post-search"]),
    # English-described tools of the 360, Chinese requests (what the maps tools pulled away)
    ("zh", "在网页上把这个确定弹窗点掉", "帮我处理一下页面上的对话框", DIALOG),
    ("zh", "把这个文件夹里的文件都列出来", "看看目录下有什么", LIST_DIR),
    ("zh", "读一下这个配置文件的内容", "打开这个文本文件看看写了什么", READ_FILE),
    ("zh", "在Notion里新建一页笔记", "帮我在笔记本里加一页", ["notion:API-post-page"]),
    ("zh", "给这个网页截个图", "把当前页面保存成图片",
     ["playwright:browser_take_screenshot", "chrome_devtools:take_screenshot",
      "puppeteer:puppeteer_screenshot", "playwright_ea:playwright_screenshot"]),
    ("zh", "分析一下这个网页的性能", "跑一下页面加载速度的评测",
     ["chrome_devtools:lighthouse_audit", "chrome_devtools:performance_start_trace",
      "chrome_devtools:performance_analyze_insight"]),
    ("zh", "提交我的代码修改", "把改动commit一下", ["git:git_commit", "git_cyanheads:git_commit"]),
    ("zh", "在Slack频道里发个通知", "往slack群里发消息", ["slack:slack_post_message"]),
    # Requests no tool of the catalog serves
    ("en", "book a train ticket to Beijing for Friday", "get me a seat on the Friday train to Beijing", []),
    ("en", "set an alarm for 6:30", "wake me up at half past six", []),
    ("en", "turn off the bedroom lights", "switch off the lamp in the bedroom", []),
    ("en", "text my mother that I'll be late", "send mom an SMS saying I'm running late", []),
    ("en", "email the invoice to the client", "send the customer their invoice by email", []),
    ("en", "order a taxi to the airport", "call me a cab to the airport", []),
    ("en", "play my workout playlist", "put on some running music", []),
    ("en", "book a table for two at 7pm", "reserve a dinner table for tonight", []),
    ("en", "start the dishwasher", "run the dishwasher now", []),
    ("en", "how many steps did I walk today", "show my step count", []),
    ("zh", "帮我订一张周五去北京的火车票", "买一张去北京的高铁票", []),
    ("zh", "明早六点半叫我起床", "定个六点半的闹钟", []),
    ("zh", "把卧室的灯关了", "关掉卧室的台灯", []),
    ("zh", "给我妈发短信说我晚点到", "发条短信告诉妈妈我要迟到", []),
    ("zh", "把发票发邮件给客户", "用邮件把发票寄给客户", []),
    ("zh", "帮我叫一辆去机场的车", "打个车去机场", []),
    ("zh", "放我的健身歌单", "来点跑步听的音乐", []),
    ("zh", "预订今晚七点两个人的位子", "帮我订个餐厅晚上吃饭", []),
    ("zh", "把洗碗机打开", "启动洗碗机", []),
    ("zh", "我今天走了多少步", "看看今天的步数", []),
]


def check(catalogs):
    """Every expected tool exists in the catalog."""
    have = set()
    for path in catalogs:
        for s in json.load(open(path))["servers"]:
            for t in s["tools"]:
                have.add(f"{s['name']}:{t['name']}")
    for lang, q, p, expect in REQUESTS:
        assert lang in ("en", "zh") and q and p and q != p, q
        for e in expect:
            assert e in have, f"{e} ({q}) is not in the catalog"
    assert len({q for _, q, _, _ in REQUESTS}) == len(REQUESTS), "a request twice"


def entry(lang, q, p, expect):
    return {"query": q, "paraphrase": p, "lang": lang,
            "expect": [dict(zip(("server", "tool"), e.split(":", 1))) for e in expect]}


def main():
    check([os.path.join(FIX, "tools.json"), os.path.join(FIX, "mixed-tools.json")])
    rng = random.Random(20261129)
    dev, test = [], []
    for lang in ("en", "zh"):
        for answerable in (True, False):
            stratum = [r for r in REQUESTS if r[0] == lang and bool(r[3]) == answerable]
            rng.shuffle(stratum)
            half = (len(stratum) + 1) // 2
            dev += [entry(*r) for r in stratum[:half]]
            test += [entry(*r) for r in stratum[half:]]
    for name, rows in (("mixed-dev.json", dev), ("mixed-test.json", test)):
        with open(os.path.join(FIX, "eval", name), "w") as f:
            json.dump(rows, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print(name, len(rows), "requests,", sum(1 for r in rows if not r["expect"]), "negatives,",
              sum(1 for r in rows if r["lang"] == "zh"), "Chinese")


if __name__ == "__main__":
    main()

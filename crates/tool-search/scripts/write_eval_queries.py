"""The #41 evaluation set: fixtures/eval/dev.json and fixtures/eval/test.json.

- dev: the 80 queries of fixtures/queries.json (written by the glossary's author, #26) plus a
  seeded share of the new ones below;
- test: the rest of the new ones. Never tune against it.

The new queries were written for #41 from the tools' own descriptions in fixtures/tools.json and
the way people type requests (many paraphrases share no word with the tool's name or
description), NOT from src/glossary.txt, and before any search result was looked at. `expect`
lists every tool that answers the request; `expect: []` marks a negative, a request no tool of
the catalog serves (smart-home, phone, payments, ... ), where the right answer is "nothing".

The split is stratified by language and positive/negative, seeded (random.Random(41)), and was
committed before any tuning. Run: python3 crates/tool-search/scripts/write_eval_queries.py
"""
import json, os, random

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "fixtures")
S = lambda server, tool: {"server": server, "tool": tool}
PRESS = [S("playwright","browser_press_key"), S("chrome_devtools","press_key"), S("playwright_ea","playwright_press_key")]
RESIZE = [S("playwright","browser_resize"), S("chrome_devtools","resize_page"), S("playwright_ea","playwright_resize")]
DIALOG = [S("playwright","browser_handle_dialog"), S("chrome_devtools","handle_dialog")]
NETREQ = [S("playwright","browser_network_requests"), S("chrome_devtools","list_network_requests")]
DARK = [S("playwright","browser_emulate_media"), S("chrome_devtools","emulate")]
EVAL = [S("playwright","browser_evaluate"), S("chrome_devtools","evaluate_script"), S("puppeteer","puppeteer_evaluate"), S("playwright_ea","playwright_evaluate")]
UPLOAD = [S("playwright","browser_file_upload"), S("chrome_devtools","upload_file"), S("playwright_ea","playwright_upload_file")]
HOVER = [S("puppeteer","puppeteer_hover"), S("playwright","browser_hover"), S("chrome_devtools","hover"), S("playwright_ea","playwright_hover")]
BACK = [S("playwright","browser_navigate_back"), S("playwright_ea","playwright_go_back"), S("chrome_devtools","navigate_page")]
FETCHPAGE = [S("fetch","fetch"), S("firecrawl","firecrawl_scrape"), S("exa","web_fetch_exa"), S("tavily","tavily_extract")]
SITEMAP = [S("tavily","tavily_map"), S("firecrawl","firecrawl_map")]
FILEINFO = [S("filesystem","get_file_info"), S("desktop_commander","get_file_info")]
FINDFILES = [S("filesystem","search_files"), S("desktop_commander","start_search")]
WRITE = [S("filesystem","write_file"), S("desktop_commander","write_file")]
EDIT = [S("filesystem","edit_file"), S("desktop_commander","edit_block")]
MOVE = [S("filesystem","move_file"), S("desktop_commander","move_file")]
READMANY = [S("filesystem","read_multiple_files"), S("desktop_commander","read_multiple_files")]
FORK = [S("github","fork_repository"), S("gitlab","fork_repository")]
CHECKOUT = [S("git","git_checkout"), S("git_cyanheads","git_checkout")]
PULL = [S("git_cyanheads","git_pull"), S("git_cyanheads","git_fetch")]
ADD = [S("git","git_add"), S("git_cyanheads","git_add")]
DIFF = [S("git","git_diff"), S("git_cyanheads","git_diff")]
PLACES = [S("google_maps","maps_search_places"), S("brave_search","brave_local_search")]
ERRORS = [S("sentry","search_issues"), S("sentry","search_events")]

new = []
def en(text, *exp): new.append({"query": text, "lang": "en", "expect": [e for x in exp for e in (x if isinstance(x, list) else [x])]})
def zh(text, *exp): new.append({"query": text, "lang": "zh", "expect": [e for x in exp for e in (x if isinstance(x, list) else [x])]})

# English, new (52)
en("which file in this folder takes up the most space", S("filesystem","list_directory_with_sizes"))
en("when was config.yaml last touched", FILEINFO)
en("find every markdown file under docs", FINDFILES)
en("show me the picture logo.png", S("filesystem","read_media_file"))
en("overwrite todo.txt with this new list", WRITE)
en("replace the third line of main.rs", EDIT)
en("note that Alice is employed by Acme", S("memory","create_relations"), S("memory","create_entities"), S("memory","add_observations"))
en("forget everything you stored about Bob", S("memory","delete_entities"))
en("dump everything you remember", S("memory","read_graph"))
en("copy that project into my own account", FORK)
en("start a brand new repo on GitHub called demo", S("github","create_repository"))
en("who wrote this line of code", S("git_cyanheads","git_blame"))
en("undo my last commit but keep the changes", S("git_cyanheads","git_reset"))
en("switch over to the release branch", CHECKOUT)
en("put my unfinished work aside for now", S("git_cyanheads","git_stash"))
en("bring in the latest changes from origin", PULL)
en("upload my local commits to the server", S("git_cyanheads","git_push"))
en("mark this version as v1.2.0", S("git_cyanheads","git_tag"))
en("what exactly is about to go into the next commit", S("git","git_diff_staged"), S("git_cyanheads","git_diff"), S("git","git_status"), S("git_cyanheads","git_status"))
en("add a thumbs-up to that Slack message", S("slack","slack_add_reaction"))
en("what were people saying in #random today", S("slack","slack_get_channel_history"))
en("how high above sea level is Denver", S("google_maps","maps_elevation"))
en("what street is at 48.85, 2.29", S("google_maps","maps_reverse_geocode"))
en("how long is the drive from each warehouse to each store", S("google_maps","maps_distance_matrix"))
en("opening hours and reviews for this restaurant", S("google_maps","maps_place_details"))
en("coffee shops near me", PLACES)
en("hit Enter on the page", PRESS)
en("switch the site to dark mode", DARK)
en("make the browser window 800 by 600", RESIZE)
en("accept the confirm popup", DIALOG)
en("which API calls did the page make", NETREQ)
en("record a video of the page", S("chrome_devtools","screencast_start"))
en("give me SEO and accessibility scores for my site", S("chrome_devtools","lighthouse_audit"))
en("hunt for memory leaks in the page's JavaScript", S("chrome_devtools","take_heapsnapshot"))
en("save this page as a PDF", S("playwright_ea","playwright_save_as_pdf"))
en("send a POST to the API with this JSON body", S("playwright_ea","playwright_post"))
en("leave a comment on that Notion page", S("notion","API-create-a-comment"))
en("export the Notion page as markdown", S("notion","API-retrieve-page-markdown"))
en("roll back the web deployment to the previous version", S("kubernetes","kubectl_rollout"))
en("reach the cluster's database from localhost:5432", S("kubernetes","port_forward"))
en("take worker-2 out of service for maintenance", S("kubernetes","node_management"))
en("run ls inside the api container", S("kubernetes","exec_in_pod"))
en("get every URL on this website", SITEMAP)
en("find academic papers on retrieval augmented generation", S("firecrawl","firecrawl_research_search_papers"))
en("how many credits do I have left on Firecrawl", S("firecrawl","firecrawl_credit_usage"))
en("what broke in production last night", ERRORS)
en("figure out why this crash happens and how to fix it", S("sentry","analyze_issue_with_seer"))
en("mark that Sentry error as resolved", S("sentry","update_issue"))
en("which programs are running on my machine", S("desktop_commander","list_processes"))
en("record my clicks in the browser and turn them into a test script", S("playwright_ea","start_codegen_session"))
en("turn this PDF into markdown", S("firecrawl","firecrawl_parse"), S("desktop_commander","read_file"))
en("write a PDF report from these notes", S("desktop_commander","write_pdf"))

# Chinese, new (78)
zh("哪个文件最占空间", S("filesystem","list_directory_with_sizes"))
zh("这个文件是什么时候改的", FILEINFO)
zh("找出所有的 markdown 文件", FINDFILES)
zh("把这张图片给我看看", S("filesystem","read_media_file"))
zh("一次读好几个文件", READMANY)
zh("把这个目录的结构画成树状", S("filesystem","directory_tree"))
zh("你能访问哪些文件夹", S("filesystem","list_allowed_directories"))
zh("把 a.txt 改名为 b.txt", MOVE)
zh("覆盖写入配置文件", WRITE)
zh("记下来：张三是我们在华为的客户", S("memory","create_entities"), S("memory","add_observations"), S("memory","create_relations"))
zh("你记得关于李四的哪些事", S("memory","search_nodes"), S("memory","open_nodes"))
zh("删掉张三的某条备注", S("memory","delete_observations"))
zh("张三和李四是同事，记住这层关系", S("memory","create_relations"))
zh("把你记住的东西全部列出来", S("memory","read_graph"))
zh("把这个项目复刻到我的账号下", FORK)
zh("在 GitHub 上新建一个仓库", S("github","create_repository"))
zh("看看这个合并请求改了哪些文件", S("github","get_pull_request_files"))
zh("这个拉取请求的检查都通过了吗", S("github","get_pull_request_status"))
zh("给这个代码变更写审查意见", S("github","create_pull_request_review"))
zh("把这个议题关掉", S("github","update_issue"))
zh("在所有仓库里搜这段代码", S("github","search_code"))
zh("找一下叫 torvalds 的用户", S("github","search_users"))
zh("这一行代码是谁写的", S("git_cyanheads","git_blame"))
zh("切换到 release 分支", CHECKOUT)
zh("先把手头没做完的改动藏起来", S("git_cyanheads","git_stash"))
zh("从远程拉取最新代码", PULL)
zh("把本地提交推送到远端", S("git_cyanheads","git_push"))
zh("给这个版本打个标签", S("git_cyanheads","git_tag"))
zh("撤销上一次提交", S("git_cyanheads","git_reset"))
zh("把那个提交挑到当前分支上", S("git_cyanheads","git_cherry_pick"))
zh("暂存这些文件准备提交", ADD)
zh("比较两个分支的差别", DIFF)
zh("把 feature 分支合并进主干", S("git_cyanheads","git_merge"))
zh("初始化一个新的 git 仓库", S("git_cyanheads","git_init"))
zh("删除没被跟踪的文件", S("git_cyanheads","git_clean"))
zh("看看 general 频道最近聊了什么", S("slack","slack_get_channel_history"))
zh("给那条消息点个赞", S("slack","slack_add_reaction"))
zh("工作区里有哪些频道", S("slack","slack_list_channels"))
zh("这个地址的经纬度是多少", S("google_maps","maps_geocode"))
zh("这个坐标是哪条街", S("google_maps","maps_reverse_geocode"))
zh("珠穆朗玛峰有多高", S("google_maps","maps_elevation"))
zh("从三个仓库到五个门店分别要开多久", S("google_maps","maps_distance_matrix"))
zh("这家餐厅几点开门，评价怎么样", S("google_maps","maps_place_details"))
zh("附近五百米内有没有咖啡店", PLACES)
zh("按一下回车键", PRESS)
zh("把页面切换成深色模式", DARK)
zh("把浏览器窗口调成手机大小", RESIZE)
zh("弹出的确认框点确定", DIALOG)
zh("这个页面都发了哪些网络请求", NETREQ)
zh("把页面录成视频", S("chrome_devtools","screencast_start"))
zh("给网站跑一下性能和无障碍评分", S("chrome_devtools","lighthouse_audit"), S("chrome_devtools","performance_start_trace"))
zh("把当前网页保存成 PDF", S("playwright_ea","playwright_save_as_pdf"))
zh("在页面里执行一段 JavaScript", EVAL)
zh("上传一个附件到网页", UPLOAD)
zh("把鼠标移到菜单上", HOVER)
zh("回到上一页", BACK)
zh("在 Notion 里新建一个页面", S("notion","API-post-page"))
zh("把 Notion 页面导出成 Markdown", S("notion","API-retrieve-page-markdown"))
zh("Notion 工作区里有哪些成员", S("notion","API-get-users"))
zh("把部署扩容到十个副本", S("kubernetes","kubectl_scale"))
zh("查查这个 pod 为什么起不来", S("kubernetes","kubectl_describe"), S("kubernetes","kubectl_logs"))
zh("应用这份 YAML 配置", S("kubernetes","kubectl_apply"))
zh("升级 helm 发布", S("kubernetes","upgrade_helm_chart"))
zh("把本地 8080 端口转发到集群里的服务", S("kubernetes","port_forward"))
zh("在容器里执行一条命令", S("kubernetes","exec_in_pod"))
zh("切换 kubectl 的上下文", S("kubernetes","kubectl_context"))
zh("回滚这个部署", S("kubernetes","kubectl_rollout"))
zh("把这篇网页的正文提取出来", FETCHPAGE)
zh("列出这个网站的所有链接", SITEMAP)
zh("帮我深入调研一下固态电池的进展", S("tavily","tavily_research"), S("firecrawl","firecrawl_agent"))
zh("找几篇关于大语言模型的论文", S("firecrawl","firecrawl_research_search_papers"))
zh("生产环境昨晚报了什么错", ERRORS)
zh("分析这个崩溃的根本原因", S("sentry","analyze_issue_with_seer"))
zh("电脑上现在跑着哪些程序", S("desktop_commander","list_processes"))
zh("给正在运行的 Python 会话输入一行代码", S("desktop_commander","interact_with_process"))
zh("生成一份 PDF 报告", S("desktop_commander","write_pdf"))
zh("东京现在是几点", S("time","get_current_time"))
zh("帮我画一只猫", S("everart","generate_image"))

# Negatives: requests no tool of the catalog serves (15 English, 15 Chinese).
for t in ["turn off the living room lights", "set an alarm for 7am tomorrow", "order a large pepperoni pizza",
          "play some jazz on the speakers", "call my mom", "send a text message to 555-1234",
          "turn up the volume", "lock the front door", "transfer $200 to my savings account",
          "set the thermostat to 21 degrees", "start the washing machine", "take a photo with my phone's camera",
          "turn on bluetooth on my phone", "water the plants in the garden", "pay my electricity bill"]:
    en(t)
for t in ["把客厅的灯关掉", "明天早上七点叫我起床", "帮我点一份外卖", "放一首周杰伦的歌", "给妈妈打个电话",
          "把空调调到二十六度", "把音量调大一点", "锁上前门", "给我的储蓄账户转两百块钱", "启动洗衣机",
          "用手机拍张照片", "打开手机的蓝牙", "交一下这个月的电费", "帮我预约明天下午的理发", "把扫地机器人打开"]:
    zh(t)

old = json.load(open(os.path.join(FIX, "queries.json")))
rng = random.Random(41)
dev, test = list(old), []
for lang in ("en", "zh"):
    for negative in (False, True):
        group = [q for q in new if q["lang"] == lang and (not q["expect"]) == negative]
        rng.shuffle(group)
        # 40% of the new positives to dev, 60% to test; negatives half and half.
        cut = len(group) // 2 if negative else round(len(group) * 0.4)
        dev += group[:cut]
        test += group[cut:]
for name, part in (("dev", dev), ("test", test)):
    json.dump(part, open(os.path.join(FIX, "eval", name + ".json"), "w"), ensure_ascii=False, indent=1)
    pos = [q for q in part if q["expect"]]
    print(name, len(part), "positives", len(pos), "zh", sum(q["lang"] == "zh" for q in pos),
          "negatives", len(part) - len(pos))

tools = json.load(open(os.path.join(FIX, "tools.json")))
have = {(s["name"], t["name"]) for s in tools["servers"] for t in s["tools"]}
bad = [(x["query"], e) for x in dev + test for e in x["expect"] if (e["server"], e["tool"]) not in have]
assert not bad, bad
queries = [q["query"] for q in dev + test]
assert len(queries) == len(set(queries)), "a query twice"
pos = [q for q in dev + test if q["expect"]]
print("all", len(dev) + len(test), "positives", len(pos), "zh", sum(q["lang"] == "zh" for q in pos))
